from term_fl.cli.commands import entry

entry()
