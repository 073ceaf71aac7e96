"""GRPO: group-relative advantages, the clipped policy loss with a k3 KL, the update."""
