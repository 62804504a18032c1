package task

import "fmt"

// Code is a tool error code.
type Code string

// The tool error codes of the specification.
const (
	UnknownAgent      Code = "unknown_agent"
	InvalidRequest    Code = "invalid_request"
	TaskNotFound      Code = "task_not_found"
	InvalidTransition Code = "invalid_transition"
)

// Codes lists every code.
var Codes = []Code{UnknownAgent, InvalidRequest, TaskNotFound, InvalidTransition}

// Error is a domain failure a caller can branch on. Its text is
// "<code>: <message>", the form MCP callers see.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

func errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
