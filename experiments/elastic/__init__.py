"""What each framework's elastic mode does when a node is lost and comes back: the trials on the simulated cluster,
what their timelines say, and the same in plain framework code."""
