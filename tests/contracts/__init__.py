"""Contract test bodies shared by a fake (unit tier) and the real adapter (integration tier)."""
