"""What Eventarc and Cloud Scheduler call: the functions, how they are served, and the
decoding of their events. functions-framework's source is `functions/main.py`, so this folder is
all it puts on `sys.path`."""
