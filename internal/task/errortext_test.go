package task

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoOutcomeFromErrorText: nothing in this package decides from an
// error's text. Outcomes and codes come from types (errors.Is, errors.As);
// an error's words are for people, and change without notice.
func TestNoOutcomeFromErrorText(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		found, err := textDecisions(name, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range found {
			t.Errorf("%s: a decision reads an error's text; branch on its type (errors.Is, errors.As) instead", f)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no Go file checked")
	}
}

// TestTextDecisionsFinds holds the checker to what it must see: the forms
// this package used before outcomes were typed, and their neighbours.
func TestTextDecisionsFinds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		body  string
		found int
	}{
		{"Contains on a message kept in a variable", `msg := err.Error()
			if strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection ended") { return }`, 2},
		{"TrimPrefix of the text", `_ = strings.TrimPrefix(err.Error(), "invalid transition: ")`, 1},
		{"Contains EOF", `if strings.Contains(err.Error(), "EOF") { return }`, 1},
		{"HasPrefix through a copy", `m := x.Err.Error(); n := m; if strings.HasPrefix(n, "agent exited") { return }`, 1},
		{"equality", `if err.Error() == "agent was killed" { return }`, 1},
		{"inequality, reversed", `if "x" != err.Error() { return }`, 1},
		{"switch on the text", `switch err.Error() { case "EOF": return }`, 1},
		{"bytes too", `if bytes.Contains([]byte(err.Error()), []byte("EOF")) { return }`, 1},
		{"a regexp", `if re.MatchString(err.Error()) { return }`, 1},
		{"the text for people only", `msg := err.Error(); d.Error = &msg; log.Info("failed", "err", msg)`, 0},
		{"a message built from the text", `msg := x.Err.Error(); msg += fmt.Sprintf(" (code %d)", 3); _ = msg`, 0},
		{"the text given to a call", `_, err = st.Transition(id, to, now, SetError(msg + err.Error())); if err != nil { return }`, 0},
		{"whether there is a message", `status, msg := store.Failed, err.Error(); if msg != "" && status == store.Failed { return }`, 0},
		{"a pair, the text second", `status, msg := store.Failed, err.Error(); if msg == "EOF" || status == "x" { return }`, 1},
		{"strings on something else", `if strings.Contains(prompt, "EOF") { return }`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fmt.Sprintf("package p\n\nfunc f() {\n%s\n}\n", tt.body)
			found, err := textDecisions("p.go", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			if len(found) != tt.found {
				t.Errorf("found %d (%q), want %d", len(found), found, tt.found)
			}
		})
	}
}

// textComparisons are the functions of strings and bytes that compare or
// take apart a text: given an error's text, they decide from its words.
var textComparisons = map[string]bool{
	"Contains": true, "ContainsAny": true, "ContainsRune": true, "ContainsFunc": true,
	"HasPrefix": true, "HasSuffix": true, "TrimPrefix": true, "TrimSuffix": true,
	"CutPrefix": true, "CutSuffix": true, "Cut": true, "EqualFold": true, "Compare": true,
	"Index": true, "IndexAny": true, "IndexByte": true, "IndexRune": true, "IndexFunc": true,
	"LastIndex": true, "LastIndexAny": true, "LastIndexByte": true, "LastIndexFunc": true,
	"Count": true, "Split": true, "SplitN": true, "SplitAfter": true, "SplitAfterN": true, "Fields": true,
}

// textDecisions lists the places in one file where an error's text (a
// call of Error(), or a variable holding one) is compared or taken apart:
// by a function of strings or bytes, ==, !=, a switch, or a regexp's
// Match or Find methods.
func textDecisions(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		held := errorTextVars(fn.Body)
		reads := func(e ast.Expr) bool { return readsErrorText(e, held) }
		report := func(n ast.Node) { found = append(found, fset.Position(n.Pos()).String()) }
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					break
				}
				pkg, _ := sel.X.(*ast.Ident)
				isText := pkg != nil && (pkg.Name == "strings" || pkg.Name == "bytes") && textComparisons[sel.Sel.Name]
				isRegexp := strings.HasPrefix(sel.Sel.Name, "Match") || strings.HasPrefix(sel.Sel.Name, "Find")
				if !isText && !isRegexp {
					break
				}
				for _, a := range n.Args {
					if reads(a) {
						report(n)
						break
					}
				}
			case *ast.BinaryExpr:
				// msg != "" asks whether there is a message, not what it says.
				if (n.Op == token.EQL || n.Op == token.NEQ) && !isEmptyString(n.X) && !isEmptyString(n.Y) &&
					(reads(n.X) || reads(n.Y)) {
					report(n)
				}
			case *ast.SwitchStmt:
				if n.Tag != nil && reads(n.Tag) {
					report(n)
				}
			}
			return true
		})
	}
	return found, nil
}

// errorTextVars returns the names in body that are given an error's text,
// directly or through another such name.
func errorTextVars(body *ast.BlockStmt) map[string]bool {
	held := map[string]bool{}
	for changed := true; changed; {
		changed = false
		mark := func(lhs []ast.Expr, rhs []ast.Expr) {
			for i, r := range rhs {
				if !readsErrorText(r, held) {
					continue
				}
				to := lhs // v1, v2 := f(): either may hold it
				if len(lhs) == len(rhs) {
					to = lhs[i : i+1]
				}
				for _, l := range to {
					if id, ok := l.(*ast.Ident); ok && !held[id.Name] {
						held[id.Name], changed = true, true
					}
				}
			}
		}
		ast.Inspect(body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				mark(n.Lhs, n.Rhs)
			case *ast.ValueSpec:
				lhs := make([]ast.Expr, len(n.Names))
				for i, id := range n.Names {
					lhs[i] = id
				}
				mark(lhs, n.Values)
			}
			return true
		})
	}
	return held
}

func isEmptyString(e ast.Expr) bool {
	lit, ok := e.(*ast.BasicLit)
	return ok && lit.Kind == token.STRING && (lit.Value == `""` || lit.Value == "``")
}

// readsErrorText reports whether e is an error's text: a call of an
// Error() method, a name that holds one, or a conversion or concatenation
// of those. A call that is given the text (fmt.Sprintf, SetError) is not:
// what it returns is something else.
func readsErrorText(e ast.Expr, held map[string]bool) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return held[e.Name]
	case *ast.ParenExpr:
		return readsErrorText(e.X, held)
	case *ast.BinaryExpr:
		return e.Op == token.ADD && (readsErrorText(e.X, held) || readsErrorText(e.Y, held))
	case *ast.CallExpr:
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Error" && len(e.Args) == 0 {
			return true
		}
		// string(b), []byte(msg)
		if len(e.Args) == 1 {
			id, isIdent := e.Fun.(*ast.Ident)
			_, isArray := e.Fun.(*ast.ArrayType)
			if (isIdent && id.Name == "string") || isArray {
				return readsErrorText(e.Args[0], held)
			}
		}
	}
	return false
}
