"""The node's own policy: what a request may make the agent write, run and open, and the paths no
request may reach. Imports the core only.
"""
