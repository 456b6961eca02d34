"""Reading state: every pair's status and the status image, a pair's detail, what is due, the
watch's heartbeat, the doctor's preflight. Imports plan/, agents/ and the inventory (a pair's
detail also a module's own secrets in act/); changes nothing on a node.
"""
