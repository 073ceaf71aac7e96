"""The tutoring environment: answers, problems and dialogue rollouts."""
