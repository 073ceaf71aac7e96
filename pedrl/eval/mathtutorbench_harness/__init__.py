"""MathTutorBench (papers 003, 000, 002): its nine tasks as the official harness runs them."""
