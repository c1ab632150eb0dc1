package riverhook_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strings"
	"testing"
)

// TestDatabaseExamplesAreListed: every Example that opens the test
// database (exampleDatabase) is in databaseExamples, which TestMain leaves
// out where there is no database: one missing fails every test run
// without PostgreSQL, a module's check from outside the repository too.
func TestDatabaseExamplesAreListed(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	listed := regexp.MustCompile(databaseExamples)
	calls := func(fn *ast.FuncDecl, names map[string]bool) bool {
		found := false
		ast.Inspect(fn, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if id, ok := call.Fun.(*ast.Ident); ok && names[id.Name] {
					found = true
				}
			}
			return !found
		})
		return found
	}
	// The functions that open it, directly or through one that does.
	opens := map[string]bool{"exampleDatabase": true}
	for grew := true; grew; {
		grew = false
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && !opens[fn.Name.Name] && calls(fn, opens) {
				opens[fn.Name.Name], grew = true, true
			}
		}
	}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || !strings.HasPrefix(fn.Name.Name, "Example") {
			continue
		}
		if opens[fn.Name.Name] != listed.MatchString(fn.Name.Name) {
			t.Errorf("%s: opens the database %v, listed in databaseExamples %v", fn.Name.Name, opens[fn.Name.Name], !opens[fn.Name.Name])
		}
	}
}
