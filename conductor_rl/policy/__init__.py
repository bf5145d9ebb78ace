"""Stage 3, the policy: sampling plans from the Conductor (`generate`,
`sampling`, `conductor`), the GRPO maths (`grpo`), one learner rank's step
(`learner`), and moving its weights into the engines (`weight_transfer`)."""
