"""The unattended loop: watch, its notifications and metrics. Drives the front door through
controller/reach.py's FrontDoor; imports act/, read/ and the inventory.
"""
