"""MathTutorBench's rules, below both the agents and the evaluation: the task names, the
harness's reading of a reply (scoring) and pedrl's constraint rules (constraints).
Running the benchmark (task files, policies, results) is pedrl.eval.mathtutorbench_harness."""
