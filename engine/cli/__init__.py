"""``parley-cli``: one module per subcommand; ``engine.cli.main`` parses and dispatches."""
