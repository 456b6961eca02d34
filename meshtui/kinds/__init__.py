"""Provider kinds, one package each: what a kind's consumers may ask for, how its software is
made to hold their logins, how a probe logs in, and the lab service that runs it."""
