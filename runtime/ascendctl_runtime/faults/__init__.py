"""Hardware fault signals (issue 24): parsers of the driver tools' output into typed
readings, observations derived from them, the policy table mapping each fault code or
signal to an action, and the evaluator that turns readings over time into actions.

Pure and standard library only: the agent on each node will run it. Nothing here reads a
device, a file of a node or the clock; the caller passes text and times in.
"""
