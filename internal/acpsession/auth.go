package acpsession

import (
	"encoding/json"
	"fmt"
	"strings"

	acp "github.com/coder/acp-go-sdk"
)

// CodeAuthRequired is ACP's auth_required error code: the agent needs the
// client to authenticate before it serves the request.
const CodeAuthRequired = -32000

// AuthMethod is one way of authenticating that the agent listed in its
// initialize answer. symm-mcp never authenticates an agent itself: the
// methods are shown so that a person can give the agent its credentials
// another way (its environment, or logging it in beforehand).
type AuthMethod struct {
	ID          string  `json:"id"`
	Name        string  `json:"name"`
	Description *string `json:"description"`
}

// authMethods converts initialize's authMethods, whatever their variant,
// and never returns nil.
func authMethods(ms []acp.AuthMethod) []AuthMethod {
	out := make([]AuthMethod, 0, len(ms))
	for _, m := range ms {
		var a AuthMethod
		switch {
		case m.Agent != nil:
			a = AuthMethod{ID: m.Agent.Id, Name: m.Agent.Name, Description: m.Agent.Description}
		case m.EnvVar != nil:
			a = AuthMethod{ID: m.EnvVar.Id, Name: m.EnvVar.Name, Description: m.EnvVar.Description}
		case m.Terminal != nil:
			a = AuthMethod{ID: m.Terminal.Id, Name: m.Terminal.Name, Description: m.Terminal.Description}
		default:
			continue
		}
		if a.Description != nil {
			d := *a.Description
			a.Description = &d
		}
		out = append(out, a)
	}
	return out
}

// AuthRequiredError is what Run returns when the agent answered a request
// with ACP's auth_required error. Callers test for it with errors.As.
type AuthRequiredError struct {
	// Request names the request the agent refused (new_session, prompt, ...).
	Request string
	// Methods are the auth methods the agent listed in initialize (empty
	// when it listed none, or when initialize itself was refused).
	Methods []AuthMethod
	// Detail is the agent's JSON-RPC error object.
	Detail string
}

func (e *AuthRequiredError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "agent requires authentication (ACP auth_required in answer to %s); ", e.Request)
	switch {
	case e.Request == "initialize":
		b.WriteString("its auth methods are unknown, since they come in initialize's answer")
	case len(e.Methods) == 0:
		b.WriteString("it lists no auth methods")
	default:
		b.WriteString("its auth methods: ")
		for i, m := range e.Methods {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%q (%s)", m.ID, m.Name)
		}
	}
	b.WriteString("; symm-mcp does not authenticate agents: log the agent in beforehand," +
		" or give it its credentials through symm-mcp's environment or --env-file")
	if e.Detail != "" {
		b.WriteString("; the agent said: ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// authRequired builds the error for a refused request from what
// initialize listed.
func (s *Session) authRequired(request, detail string) *AuthRequiredError {
	s.mu.Lock()
	methods := authMethods(s.st.init.AuthMethods)
	s.mu.Unlock()
	return &AuthRequiredError{Request: request, Methods: methods, Detail: detail}
}

// errorCode reads the code of a JSON-RPC error object (0 when it has none).
func errorCode(raw json.RawMessage) int {
	var e struct {
		Code int `json:"code"`
	}
	_ = json.Unmarshal(raw, &e)
	return e.Code
}
