package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/permission"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// Human decisions (intent 0024): a task spawned with ask puts a permission
// request of an asked kind to the person at the MCP session that spawned
// it. To a client of a 2025 protocol the question is an elicitation/create
// request, sent when the agent asks; to a 2026-07-28 client, which takes
// no request from the server, it is the input-required result of that
// session's next wait_tasks or get_task on the task (the SDK's multi
// round-trip), and the retried call carries the answer.

// multiRoundTrip is the first protocol version whose clients take
// questions as input-required results.
const multiRoundTrip = "2026-07-28"

// elicitor is the Asker of one spawn: the session that spawned the task.
type elicitor struct {
	ss *mcp.ServerSession
	// deferred: the session speaks 2026-07-28; its questions wait for
	// its next call on the task.
	deferred bool
	// gone is closed when the session ends (nil: not known, as over HTTP).
	gone <-chan struct{}
	// related is the MCP task the spawn runs as, if any (mcptasks.go):
	// its questions carry it, as the 2025-11-25 tasks form requires.
	related string
}

var _ permission.Asker = (*elicitor)(nil)

// asker is the Asker for a spawn through req, or nil when its client does
// not offer form elicitation (every asked request is then rejected, with
// decided_by no_elicitation).
func (h handlers) asker(ctx context.Context) permission.Asker {
	req := callOf(ctx)
	if req == nil || req.Session == nil {
		return nil
	}
	caps := req.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil || (caps.Elicitation.Form == nil && caps.Elicitation.URL != nil) {
		return nil
	}
	related, _ := ctx.Value(relatedTaskCtx{}).(string)
	return &elicitor{ss: req.Session, deferred: req.ProtocolVersion() >= multiRoundTrip, gone: h.opts.gone, related: related}
}

// Ask sends the question as elicitation/create, or, for a 2026-07-28
// session, waits while the session's calls carry it (task.Service.Answer
// delivers the answer; this only notices the session's end).
//
// When ctx ends first (the question answered on the live view, timed out,
// or its task stopping), the SDK retires the elicitation/create request
// and sends the client notifications/cancelled for it: the client's form
// is withdrawn, and a reply that still comes is dropped.
func (e *elicitor) Ask(ctx context.Context, q permission.Question) (permission.Answer, error) {
	if e.deferred {
		if e.gone == nil {
			// Over HTTP a 2026-07-28 request has a session of its own,
			// which ended with the spawn: no later call is "that
			// session's".
			return permission.Answer{}, permission.ErrSessionGone
		}
		select {
		case <-ctx.Done():
			return permission.Answer{}, ctx.Err()
		case <-e.gone:
			return permission.Answer{}, permission.ErrSessionGone
		}
	}
	params := elicitParams(q)
	if e.related != "" {
		params.Meta = mcp.Meta{relatedTaskKey: map[string]any{"taskId": e.related}}
	}
	res, err := e.ss.Elicit(ctx, params)
	switch {
	case err == nil:
		return answerOf(res), nil
	case ctx.Err() != nil:
		return permission.Answer{}, ctx.Err()
	case errors.Is(err, mcp.ErrConnectionClosed) || closed(e.gone):
		return permission.Answer{}, fmt.Errorf("%w: %w", permission.ErrSessionGone, err)
	default:
		return permission.Answer{}, fmt.Errorf("elicitation/create: %w", err)
	}
}

func closed(c <-chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// decisionField is the form's one field.
const decisionField = "decision"

// elicitParams is the form for q: who asks for what, and one field,
// decision, allow_once or reject_once.
func elicitParams(q permission.Question) *mcp.ElicitParams {
	var b strings.Builder
	fmt.Fprintf(&b, "Agent %s (task %s) asks permission for a %s tool call: %s", q.Agent, q.TaskID, kindOf(q.Kind), q.Title)
	if q.RawInput != "" {
		fmt.Fprintf(&b, "\nRaw input: %s", q.RawInput)
	}
	return &mcp.ElicitParams{
		Mode:    "form",
		Message: b.String(),
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				decisionField: map[string]any{
					"type":        "string",
					"title":       "Decision",
					"description": "allow_once runs this one tool call; reject_once refuses it",
					"enum":        []string{permission.AllowOnce, permission.RejectOnce},
				},
			},
			"required": []string{decisionField},
		},
	}
}

func kindOf(kind string) string {
	if kind == "" {
		return "other"
	}
	return kind
}

// answerOf is the client's answer through MCP: allowed once when accepted
// with decision allow_once; a decline, a cancel or anything else rejects
// once.
func answerOf(res *mcp.ElicitResult) permission.Answer {
	allow := res != nil && res.Action == "accept" && res.Content[decisionField] == permission.AllowOnce
	return permission.Answer{Allow: allow, Via: permission.ViaMCP}
}

// inputRequired is a handler's answer that the call needs the person
// first: addTool returns it as an input-required result.
type inputRequired struct{ requests mcp.InputRequestMap }

func (*inputRequired) Error() string { return "input required" }

// questions carries the person's decisions for tasks ids in a call of a
// 2026-07-28 session: the answers a retried call brings are delivered,
// then the questions of this session still open on the tasks, if any, are
// the call's result (an *inputRequired error).
func (h handlers) questions(ctx context.Context, ids []string) error {
	req := callOf(ctx)
	if req == nil {
		return nil
	}
	if len(req.Params.InputResponses) > 0 {
		// Only the spawning session answers a question: an answer for
		// another session's question, or one no longer open, is ignored.
		for _, d := range h.svc.Decisions(ids) {
			r, ok := req.Params.InputResponses[d.Key].(*mcp.ElicitResult)
			if ok && h.carries(req, d) {
				h.svc.Answer(d.Key, answerOf(r))
			}
		}
	}
	return h.mine(req, h.svc.Decisions(ids))
}

// carries reports whether d is a question this call's session carries.
func (handlers) carries(req *mcp.CallToolRequest, d task.Decision) bool {
	return carriedBy(req.Session, d)
}

// carriedBy reports whether d is a question session ss carries: one of
// its 2026-07-28 spawns asks it.
func carriedBy(ss *mcp.ServerSession, d task.Decision) bool {
	e, ok := d.Asker.(*elicitor)
	return ok && e.deferred && e.ss == ss
}

// mine is an *inputRequired for the decisions this session is to carry,
// or nil.
func (h handlers) mine(req *mcp.CallToolRequest, ds []task.Decision) error {
	if req == nil {
		return nil
	}
	var out mcp.InputRequestMap
	for _, d := range ds {
		if h.carries(req, d) {
			if out == nil {
				out = make(mcp.InputRequestMap)
			}
			out[d.Key] = elicitParams(d.Question)
		}
	}
	if out == nil {
		return nil
	}
	return &inputRequired{out}
}

// callKey holds the tools/call request in a handler's context.
type callKey struct{}

func callOf(ctx context.Context) *mcp.CallToolRequest {
	req, _ := ctx.Value(callKey{}).(*mcp.CallToolRequest)
	return req
}

// decisionsJSON is the decisions member of a wait_tasks reply.
func decisionsJSON(ds []task.Decision) []byte {
	out := make([]decisionOut, len(ds))
	for i, d := range ds {
		out[i] = decisionOut{TaskID: d.Question.TaskID, ToolCallID: d.Question.ToolCallID, Title: d.Question.Title, Kind: d.Question.Kind}
	}
	return jsonValue(out)
}

// decisionOut is a permission request waiting for a person.
type decisionOut struct {
	TaskID     string `json:"task_id"`
	ToolCallID string `json:"tool_call_id"`
	Title      string `json:"title"`
	Kind       string `json:"kind"`
}
