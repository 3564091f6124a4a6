package ray

// Subscribers returns how many Notify subscriptions of r (and its
// Deployer) are live.
func Subscribers(r *Ray) int {
	r.poll.mu.Lock()
	defer r.poll.mu.Unlock()
	return len(r.poll.subs)
}
