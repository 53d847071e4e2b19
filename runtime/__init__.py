"""What every command and rank runs by, apart from the contract: the command line and its one-line errors, signals,
a disk that fills, files written as the umask says, heartbeats, a run's own folder, and the launch it descends from."""
