package task

// Offer is an agent's offer for a setting: the current value (null for a
// launch flag) and the values it accepts.
type Offer struct {
	Current *string  `json:"current"`
	Values  []string `json:"values"`
}

// Pin is one setting symm-mcp pins, and whether the agent offers it.
type Pin struct {
	Setting   string `json:"setting"`
	Value     string `json:"value"`
	Available bool   `json:"available"`
}

// Description is describe_agent's answer. An offer the agent does not make
// is null; Error says why the agent could not be described.
type Description struct {
	Agent      string   `json:"agent"`
	Executable string   `json:"executable"`
	Path       *string  `json:"path"`
	Version    *string  `json:"version"`
	CanResume  *bool    `json:"can_resume"`
	Options    []string `json:"options"`
	Model      *Offer   `json:"model"`
	Effort     *Offer   `json:"effort"`
	Pins       []Pin    `json:"pins"`
	Error      *string  `json:"error"`
}
