from expgit.cli import run

run()
