"""Analysis: the expert's advice, a game's analysis as a job, and fair play from analyses."""
