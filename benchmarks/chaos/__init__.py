"""The parts of benchmarks/bench_chaos.py (issue 27), each small and on its own:

- `schedule`: the seeded schedule of bad luck and the producer's traffic, pure and replayable;
- `eventarc`: Eventarc's part, redelivery with a limit and a dead-letter count, in front of
  the served instances (the emulator delivers each trigger's events once, to one host);
- `fleet`: the served processes (3 worker instances, advance_flow, the reaper, the emulators,
  the CHART-IMG stand-in) and the process chaos (SIGSTOP the emulator, SIGKILL an instance);
- `conductor`: the schedule applied as time passes, each action recorded when it happened;
- `counting`: what a user counts at the end (units, calls, charts, wrong charts, stuck steps),
  and `targets`: the figures held to issue 27's targets.

The stand-in's chaos controls are tests/harness/chaos_stand_in.py (test code, like the stand-in).
"""
