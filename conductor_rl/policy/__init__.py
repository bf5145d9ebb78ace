"""The policy: sampling plans from the Conductor (`sampling`,
`conductor`, both through conductor_rl/generation.py), the GRPO maths (`grpo`), one learner rank's step
(`learner`), and moving its weights into the engines (`weight_transfer`)."""
