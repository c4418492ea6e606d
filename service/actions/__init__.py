"""Actions on the cluster an alert calls for: quarantining a paged node (Kubernetes or Slurm)."""
