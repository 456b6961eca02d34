"""The dashboard's screens: main (pairs), pair, hosts, audit, job, plan, confirm, help."""
