"""delegate: hand work to AI coding agents in tmux and keep a verifiable record of what they did."""

__version__ = "0.1.0"


def version_line() -> str:
    """`delegate 0.1.0`: the installed distribution's version, else this package's."""
    # importlib.metadata (email, zipfile, ...): only for --version, never on import of delegate
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"delegate {version('delegate')}"
    except PackageNotFoundError:
        return f"delegate {__version__}"
