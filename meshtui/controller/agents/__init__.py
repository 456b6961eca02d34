"""The transport to agents: signed calls (client) over kept HTTP/1.1 connections (channel). Imports
the core and the protocol only.
"""
