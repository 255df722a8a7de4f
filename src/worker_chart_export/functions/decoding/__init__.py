"""Firestore CloudEvents as plain values: the cheap skim, the whole version, the `Value`s."""
