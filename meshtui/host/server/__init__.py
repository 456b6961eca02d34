"""The agent's server: the ASGI app, the connection guard, and the routes that check an envelope
and answer. The only part of the agent that knows HTTP; imports every other room of the agent.
"""
