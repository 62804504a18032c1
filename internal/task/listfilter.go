package task

import (
	"slices"
	"strings"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
)

// Resolutions lists the resolutions a task can have, for list_tasks'
// filter: unresolved and the judgements.
var Resolutions = append([]ledger.Resolution{ledger.Unresolved}, ledger.Judgements...)

// listFilter checks list_tasks' filters: a status or resolution that no
// task can have is a mistake worth naming, where an agent or initiator no
// task has is a fine question with no answer.
func listFilter(req ListRequest) (ledger.Filter, error) {
	statuses, err := enumValues("status", req.Statuses, ledger.Statuses)
	if err != nil {
		return ledger.Filter{}, err
	}
	resolutions, err := enumValues("resolution", req.Resolutions, Resolutions)
	if err != nil {
		return ledger.Filter{}, err
	}
	for _, f := range []struct {
		name   string
		values []string
	}{{"agent", req.Agents}, {"initiator_id", req.InitiatorIDs}, {"host", req.Hosts}} {
		for _, v := range f.values {
			if len(v) > MaxLabelBytes {
				return ledger.Filter{}, errorf(InvalidRequest, "%s: a value has %d bytes, more than %d", f.name, len(v), MaxLabelBytes)
			}
		}
	}
	return ledger.Filter{Statuses: statuses, Agents: req.Agents, InitiatorIDs: req.InitiatorIDs, Resolutions: resolutions, Hosts: req.Hosts}, nil
}

func enumValues[T ~string](name string, values []string, valid []T) ([]T, error) {
	out := make([]T, 0, len(values))
	for _, v := range values {
		if !slices.Contains(valid, T(v)) {
			names := make([]string, len(valid))
			for i, x := range valid {
				names[i] = string(x)
			}
			return nil, errorf(InvalidRequest, "%s: %.80q is not a %s (%s)", name, v, name, strings.Join(names, ", "))
		}
		out = append(out, T(v))
	}
	return out, nil
}
