"""What the agent persists beside its keys: its identity, a new controller key pinned, the replay
guard, what it holds, the secret files it wrote, the audit head. Imports the core and the
protocol only.
"""
