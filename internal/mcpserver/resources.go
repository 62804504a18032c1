package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/symm-mcp/symm-mcp/internal/ledger"
	"github.com/symm-mcp/symm-mcp/internal/task"
)

// The task resources (intent 0023): a task's record, as get_task returns
// it, and one page of its log, as get_events returns it.
const (
	resourceScheme    = "symm"
	taskURIPrefix     = "symm://tasks/"
	taskURITemplate   = "symm://tasks/{task_id}"
	eventsURITemplate = "symm://tasks/{task_id}/events{?after_seq,limit}"
	jsonMIME          = "application/json"
	// ListedFinished is how many finished tasks resources/list names,
	// newest first, after every live one.
	ListedFinished = 100
)

// private marks a result as the caller's, stale at once.
var private = mcp.Cacheable{TTLMs: 0, CacheScope: "private"}

// liveStatuses and endedStatuses split the tasks resources/list names.
var (
	liveStatuses  = []string{string(ledger.Created), string(ledger.Starting), string(ledger.Running)}
	endedStatuses = []string{string(ledger.Succeeded), string(ledger.Failed), string(ledger.Cancelled)}
)

func addResources(s *mcp.Server, svc Service) {
	read := func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return readResource(svc, req.Params.URI)
	}
	s.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "task", Title: "A symm-mcp task", URITemplate: taskURITemplate, MIMEType: jsonMIME,
		Description: "The task's record, as get_task returns it.",
	}, read)
	s.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "task-events", Title: "A page of a symm-mcp task's events", URITemplate: eventsURITemplate, MIMEType: jsonMIME,
		Description: "One page of the task's events after after_seq (default 0), at most limit (default 100, at most 1000) " +
			"and 32 KiB of them, as get_events returns it: cursor, has_more, status, events.",
	}, read)
}

// taskURI is the resource of a task's record.
func taskURI(id string) string { return taskURIPrefix + url.PathEscape(id) }

// resourceRef is a task resource a URI names.
type resourceRef struct {
	taskID string
	events bool
	query  url.Values
}

// parseResourceURI reads symm://tasks/<id> or symm://tasks/<id>/events
// with its query. Errors say what is wrong with the URI.
func parseResourceURI(uri string) (resourceRef, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return resourceRef{}, fmt.Errorf("%.200q is not a URI: %w", uri, err)
	}
	if u.Scheme != resourceScheme || u.Host != "tasks" || u.Opaque != "" || u.User != nil || u.Fragment != "" {
		return resourceRef{}, fmt.Errorf("%.200q is not symm://tasks/{task_id} or symm://tasks/{task_id}/events", uri)
	}
	rest, _ := strings.CutPrefix(u.Path, "/")
	id, sub, hasSub := strings.Cut(rest, "/")
	ref := resourceRef{taskID: id, query: u.Query()}
	switch {
	case id == "":
		return resourceRef{}, fmt.Errorf("%.200q names no task id", uri)
	case hasSub && sub == "events":
		ref.events = true
	case hasSub:
		return resourceRef{}, fmt.Errorf("%.200q: a task has no resource %q (only events)", uri, sub)
	case u.RawQuery != "":
		return resourceRef{}, fmt.Errorf("%.200q: a task's record takes no parameters", uri)
	}
	return ref, nil
}

// invalidParams is a JSON-RPC invalid-params error saying what is wrong.
func invalidParams(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}

// readResource reads a task resource by calling what get_task and
// get_events call, so that the resource is what the tool returns.
func readResource(svc Service, uri string) (*mcp.ReadResourceResult, error) {
	ref, err := parseResourceURI(uri)
	if err != nil {
		return nil, invalidParams("%v", err)
	}
	var b json.RawMessage
	if ref.events {
		req, qerr := eventsQuery(ref)
		if qerr != nil {
			return nil, invalidParams("%.200q: %v", uri, qerr)
		}
		var p ledger.Page
		if p, err = svc.Events(req); err == nil {
			b = eventsReply(p)
		}
	} else {
		b, err = svc.Task(ref.taskID)
	}
	if err != nil {
		return nil, resourceError(uri, err)
	}
	return &mcp.ReadResourceResult{
		Contents:  []*mcp.ResourceContents{{URI: uri, MIMEType: jsonMIME, Text: string(b)}},
		Cacheable: private,
	}, nil
}

// eventsQuery reads the events resource's parameters: after_seq and
// limit, each at most once, as get_events takes them.
func eventsQuery(ref resourceRef) (task.EventsRequest, error) {
	req := task.EventsRequest{TaskID: ref.taskID}
	for k, vs := range ref.query {
		if len(vs) != 1 {
			return req, fmt.Errorf("%s is given %d times", k, len(vs))
		}
		n, err := strconv.ParseInt(vs[0], 10, 64)
		if errors.Is(err, strconv.ErrRange) && n > 0 {
			err = nil // past int64: n saturated, as get_events reads it
		}
		switch k {
		case "after_seq":
			if err != nil || n < 0 {
				return req, fmt.Errorf("after_seq must be a whole number, 0 or more, not %.40q", vs[0])
			}
			req.AfterSeq = n
		case "limit":
			if err != nil || n < 1 {
				return req, fmt.Errorf("limit must be a whole number, 1 or more, not %.40q", vs[0])
			}
			req.Limit = int(min(n, task.MaxPageLimit))
		default:
			return req, fmt.Errorf("unknown parameter %.40q (after_seq and limit are known)", k)
		}
	}
	return req, nil
}

// resourceError turns the service's refusal into the JSON-RPC error a
// resource read answers with: an unknown task is "resource not found",
// an argument the service refuses is invalid params.
func resourceError(uri string, err error) error {
	if te := (*task.Error)(nil); errors.As(err, &te) {
		switch te.Code {
		case task.TaskNotFound:
			return mcp.ResourceNotFoundError(uri)
		case task.InvalidRequest:
			return invalidParams("%.200q: %s", uri, te.Message)
		}
	}
	return err
}

// listResources answers resources/list with the tasks: every live one,
// then the newest ListedFinished finished ones. The SDK lists only the
// resources added to it, and tasks come and go.
func listResources(svc Service) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "resources/list" {
				return next(ctx, method, req)
			}
			out := []*mcp.Resource{}
			for cursor := ""; ; {
				p, err := svc.ListTasks(task.ListRequest{Limit: task.MaxListLimit, Cursor: cursor, Statuses: liveStatuses})
				if err != nil {
					return nil, err
				}
				out = appendResources(out, p.Tasks)
				if p.NextCursor == nil {
					break
				}
				cursor = *p.NextCursor
			}
			p, err := svc.ListTasks(task.ListRequest{Limit: ListedFinished, Statuses: endedStatuses})
			if err != nil {
				return nil, err
			}
			// Tasks change all the time and are the caller's own: stale at
			// once, cached by nobody else.
			return &mcp.ListResourcesResult{Resources: appendResources(out, p.Tasks), Cacheable: private}, nil
		}
	}
}

func appendResources(out []*mcp.Resource, summaries []json.RawMessage) []*mcp.Resource {
	for _, raw := range summaries {
		var s struct {
			TaskID string        `json:"task_id"`
			Agent  string        `json:"agent"`
			Status ledger.Status `json:"status"`
			Title  *string       `json:"title"`
		}
		if json.Unmarshal(raw, &s) != nil {
			continue // a summary is the ledger's own JSON: this does not happen
		}
		title := s.Agent + " task"
		if s.Title != nil && *s.Title != "" {
			title = *s.Title
		}
		out = append(out, &mcp.Resource{
			URI: taskURI(s.TaskID), Name: "task " + s.TaskID, Title: title, MIMEType: jsonMIME,
			Description: fmt.Sprintf("%s task, %s; its events: %s/events", s.Agent, s.Status, taskURI(s.TaskID)),
		})
	}
	return out
}
