"""Peer supervisors (supervisord, circus, pm2) for tenure's benchmark suite."""
