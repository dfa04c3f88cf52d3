"""delegate: hand work to AI coding agents in tmux and keep a verifiable record of what they did."""

__version__ = "0.1.0"
