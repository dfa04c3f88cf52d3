"""`delegate top` and `ps --watch`: the jobs, live, in the terminal.

`app` is the textual application (the one module importing textual, loaded only when the view
runs); `rows` is what it shows, as plain text, so its logic needs no screen.
"""
