"""One module per nox session (or family of sessions); sessions never import each other."""
