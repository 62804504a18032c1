package ledger

// Host is one daemon of a cluster as list_hosts returns it: what its
// heartbeat said last. Hosts are not tasks, but they share the ledger's
// store and its serializable form, so the model lives beside the task's.
type Host struct {
	Name    string      `json:"name"`
	Version string      `json:"version"`
	Agents  []HostAgent `json:"agents"`
	// LiveTasks counts the host's tasks whose end is not recorded yet.
	LiveTasks int `json:"live_tasks"`
	// LastSeen is when its last heartbeat was written.
	LastSeen Time `json:"last_seen"`
}

// HostAgent is an agent found on a host's PATH, as doctor sees it.
type HostAgent struct {
	Agent string `json:"agent"`
	Path  string `json:"path"`
	// Version is the executable's version; null when it was not asked.
	Version *string `json:"version"`
}
