package acpsession

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/permission"
)

// The session state has one writer: nothing outside state.go assigns to a
// field of a Session's st (apply, and the constructor beside it).
func TestStateHasOneWriter(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "state.go" {
			continue
		}
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		f, err := parser.ParseFile(fset, name, src, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			var lhs []ast.Expr
			switch n := n.(type) {
			case *ast.AssignStmt:
				lhs = n.Lhs
			case *ast.IncDecStmt:
				lhs = []ast.Expr{n.X}
			case *ast.UnaryExpr: // &s.st...: a pointer to write through
				if n.Op == token.AND {
					lhs = []ast.Expr{n.X}
				}
			}
			for _, e := range lhs {
				assert.False(t, writesState(e), "%s: session state written outside apply", fset.Position(e.Pos()))
			}
			return true
		})
	}
}

// writesState reports whether e is st or reaches into it (x.st.f, x.st.m[k]).
func writesState(e ast.Expr) bool {
	for {
		switch x := e.(type) {
		case *ast.SelectorExpr:
			if x.Sel.Name == "st" {
				return true
			}
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		default:
			return false
		}
	}
}

// The transitions the package doc draws, fact by fact.
func TestPhaseTransitions(t *testing.T) {
	t.Parallel()
	load, prompt := factSent{method: "session/load"}, factSent{method: "session/prompt"}
	cases := []struct {
		name  string
		facts []fact
		want  phase
	}{
		{"new", nil, phaseIdle},
		{"Run", []fact{factRunStarted{}}, phaseSetup},
		{"load sent", []fact{factRunStarted{}, load}, phaseReplay},
		{"load answered", []fact{factRunStarted{}, load, factSetupAnswered{load: true}}, phaseSetup},
		{"started", []fact{factRunStarted{}, factStarted{sid: "s"}}, phaseStarted},
		{"prompt sent", []fact{factRunStarted{}, factStarted{sid: "s"}, prompt}, phaseTurn},
		{"prompt answered", []fact{factRunStarted{}, factStarted{sid: "s"}, prompt, factPromptAnswered{}}, phaseOver},
		{"Run gave up on the turn", []fact{factRunStarted{}, factStarted{sid: "s"}, prompt, factTurnEnded{}}, phaseOver},
		{"Run gave up before the prompt", []fact{factRunStarted{}, factStarted{sid: "s"}, factTurnEnded{}}, phaseOver},
		{"setup failed", []fact{factRunStarted{}, factNoSession{}}, phaseNoSession},
		{"failed during replay", []fact{factRunStarted{}, load, factNoSession{}}, phaseNoSession},
		{"no session after the start", []fact{factRunStarted{}, factStarted{sid: "s"}, factNoSession{}}, phaseStarted},
		{"the stream ends, the phase stays", []fact{factRunStarted{}, factStarted{sid: "s"}, factStreamEnded{}, factSinkClosed{}}, phaseStarted},
		{"a second prompt is not a new turn", []fact{factRunStarted{}, factStarted{sid: "s"}, prompt, factPromptAnswered{}, prompt}, phaseOver},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newBareSession(nopSink{})
			s.st = newState("", nil, permission.Ask{}, make(chan struct{}), make(chan struct{}))
			for _, f := range tc.facts {
				s.feed(f)
			}
			assert.Equal(t, tc.want, s.st.phase)
		})
	}
	t.Run("Run twice, or after the stream ended", func(t *testing.T) {
		s := newBareSession(nopSink{})
		s.st = newState("", nil, permission.Ask{}, make(chan struct{}), make(chan struct{}))
		s.apply(factStreamEnded{})
		assert.Equal(t, errStreamEnded, s.apply(factRunStarted{}).refuse)
		s.st = newState("", nil, permission.Ask{}, make(chan struct{}), make(chan struct{}))
		require.NoError(t, s.apply(factRunStarted{}).refuse)
		assert.Equal(t, errRunTwice, s.apply(factRunStarted{}).refuse)
	})
}
