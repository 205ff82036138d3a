"""fabric: an emulator for AI-cluster network fabrics."""
