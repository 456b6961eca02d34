"""The actions that deliver or check: push, rotate (and what it makes ready ahead, and finishing
one left journaled), probe, drill, a module's own secrets, and the sending and recording they
share. Reach the mesh through controller/reach.py; import plan/, agents/, read/ and the
inventory, never core.py, records/ or unattended/.
"""
