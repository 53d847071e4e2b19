"""What runs inside a rank: the models, the data, and one training step for every backend and launcher."""
