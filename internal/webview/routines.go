package webview

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// routineWait bounds a routine's action: a run waits for its task's
// agent to start.
const routineWait = 30 * time.Second

// noRoutines is the list of a daemon without routines.
var noRoutines = json.RawMessage(`{"routines":[]}`)

// routines answers the routines with their next runs and last runs.
func (s *Server) routines(w http.ResponseWriter, r *http.Request, _ *session) {
	if s.cfg.Routines == nil {
		writeJSON(w, noRoutines)
		return
	}
	b, err := s.cfg.Routines.RoutinesJSON(r.Context())
	if err != nil {
		taskError(w, err)
		return
	}
	writeJSON(w, b)
}

type routineVerb int

const (
	routineRun routineVerb = iota
	routinePause
	routineResume
)

// routineAction runs, pauses or resumes the routine the path names. The
// name is the scheduler's to check (a name it does not know, or not of
// its characters, is a 400).
func (s *Server) routineAction(verb routineVerb) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Routines == nil {
			writeError(w, http.StatusNotFound, "this daemon runs no routines")
			return
		}
		ctx, stop := context.WithTimeout(r.Context(), routineWait)
		defer stop()
		name := r.PathValue("name")
		var b json.RawMessage
		var err error
		switch verb {
		case routineRun:
			b, err = s.cfg.Routines.RunRoutine(ctx, name)
		default:
			b, err = s.cfg.Routines.PauseRoutine(ctx, name, verb == routinePause)
		}
		if err != nil {
			taskError(w, err)
			return
		}
		s.log.Info("routine acted on from the live view", "routine", name, "action", [...]string{"run", "pause", "resume"}[verb])
		writeJSON(w, b)
	}
}
