from term_fl.cli import entry

entry()
