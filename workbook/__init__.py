"""The notebooks' analysis layer, built on the reusable core (``fedlib`` itself).

metric_study    the non-IID metric grid of Fig. 3 and the claims computed from it (nb 01–02)
importance      the four models of Fig. 4 and their metric importances (nb 03)
cluster_study   silhouette selection of τ across partitions (Figs. 5–6, nb 04)
tables          Tables III/IV from run records (nb 05–06)
like_for_like   Table III's FMNIST column at the paper's protocol, both readings (nb 06, benchmarks)
paper_tables    the paper tables python -m fedlib.grid runs (the fedlib.tables entry point)
report_cells    the reproduction report's catalogue: each paper cell, its value, where ours is read
report          the reproduction report from committed records: verdicts, scoreboard (nb 00, docs/findings.md)
plots           figure helpers and Figs. 3–4; ``save_figure`` writes PNG + CSV
training_plots  Figs. 5–8 (silhouettes, τ, accuracy vs heterogeneity, ECDFs)
"""
