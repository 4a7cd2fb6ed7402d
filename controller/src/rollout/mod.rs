//! Group rollouts: a pure planner and the Kubernetes calls that carry out its actions.
