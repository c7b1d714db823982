"""What every part of RL-Insight leans on and none owns: host and port rules (netaddr),
crash-safe files (files), child processes that die with their parent (childproc), a failed
send's frames let go of (tracebacks), the server's token (secret), the files shipped in the
package (resources) and the package version (version).

A package beside rl_insight/config/, not inside it: these modules know nothing of the
settings (only secret reads them, to find the token's file), and the client's collectors,
the lane actors and the server's supervisor import them without loading config/'s YAML
reader and its Settings classes, which ``import rl_insight.config.<module>`` would load
first. They import nothing of the package above config/, so any floor may import them.
"""
