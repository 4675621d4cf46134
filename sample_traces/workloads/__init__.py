"""Named synthetic workloads: shared sampling and building blocks, one module per workload."""
