"""Pure online detection for prexid: detectors, fusion and alert lifecycle over numpy arrays.

Nothing here does I/O or reads a clock: event time arrives with every batch, state leaves as bytes.
"""
