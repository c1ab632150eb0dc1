package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/internal/redact"
)

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1 // did not verify, or was not delivered
	exitUsage  = 2
)

// command is one subcommand, in cmd/go's shape: its usage line, short
// help, flags and run function.
type command struct {
	name  string
	args  string // after the flags, for the usage line
	short string
	long  string
	flags func(fs *flag.FlagSet, e *env) func(ctx context.Context, args []string) int
}

// env is what a command runs with: its streams and environment.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	loaded         []string        // the secrets loaded, hidden from what fail prints (hide)
	loadedSecrets  *redact.Secrets // the same, matched in any case and as JSON escapes them
}

// hide returns s without the secrets loaded: a parser's error quotes its
// input, which may be a secrets file given as a capture. Those shorter than
// redact.MinLen are hidden as they are written.
func (e *env) hide(s string) string {
	if e.loadedSecrets != nil {
		s = e.loadedSecrets.Scrub(s)
	}
	for _, secret := range e.loaded {
		s = strings.ReplaceAll(s, secret, "…")
	}
	return s
}

// usageError is an error of the command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

var commands = []*command{triggerCmd, listenCmd, verifyCmd, signCmd}

// run runs the command line args and returns the exit status. ctx ends
// listen.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	if len(args) == 0 {
		topUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		topUsage(stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		fs := flag.NewFlagSet("webhook "+c.name, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		runCmd := c.flags(fs, e)
		printUsage := func(w io.Writer) {
			fmt.Fprintf(w, "usage: webhook %s [flags] %s\n\n%s\n\nFlags (before or after the arguments; -- ends them):\n", c.name, c.args, c.long)
			fs.SetOutput(w)
			fs.PrintDefaults()
			fs.SetOutput(io.Discard)
		}
		positional, err := parseArgs(fs, args[1:])
		if err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printUsage(stdout)
				return exitOK
			}
			fmt.Fprintf(stderr, "webhook %s: %s\n", c.name, redact.Printable(err.Error()))
			fmt.Fprintf(stderr, "run 'webhook %s -h' for usage\n", c.name)
			return exitUsage
		}
		return runCmd(ctx, positional)
	}
	fmt.Fprintf(stderr, "webhook: unknown command %q\n", redact.PrintableCut(args[0], 40))
	topUsage(stderr)
	return exitUsage
}

// given reports whether the flag name was on the command line: its zero
// value may be one a user gives.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parseArgs parses the flags in args wherever they are, before, between
// or after the positional arguments, as people type them
// ("trigger URL -payload FILE"), and returns the positional arguments in
// order. "--" ends the flags; "-" alone is an argument (standard input).
// The flag package parses the flags, in their order, so its rules and
// errors hold: a flag's value is the next argument unless it is a boolean
// flag or written -name=value.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			positional = append(positional, args[i+1:]...)
			i = len(args)
		case len(a) < 2 || a[0] != '-':
			positional = append(positional, a)
		default:
			flags = append(flags, a)
			name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
			if strings.Contains(name, "=") || i+1 == len(args) {
				continue
			}
			if f := fs.Lookup(name); f != nil && !isBoolFlag(f) {
				i++
				flags = append(flags, args[i])
			}
		}
	}
	if err := fs.Parse(flags); err != nil {
		return nil, err
	}
	return positional, nil
}

// isBoolFlag reports whether f takes no value, as the flag package decides.
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func topUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: webhook <command> [flags] [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Build and debug a receiver of the service's signed webhooks. Commands:")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.short)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'webhook <command> -h' for a command's flags; flags may come before or")
	fmt.Fprintln(w, "after the arguments, and -- ends them. Exit status: 0 success, 1 did not")
	fmt.Fprintln(w, "verify or was not delivered, 2 usage error.")
}

// fail reports err and returns its exit status: 2 for a usage error, 1
// otherwise.
func (e *env) fail(name string, err error) int {
	fmt.Fprintf(e.stderr, "webhook %s: %s\n", name, redact.Printable(e.hide(err.Error())))
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(e.stderr, "run 'webhook %s -h' for usage\n", name)
		return exitUsage
	}
	return exitFailed
}

// secretFlags are where a command reads its secrets: never the command
// line, where the shell's history and ps would show them. Their values are
// printed only when they read as a variable's name or a file's path: a
// secret pasted in their place is named by its flag alone (mayBeSecret).
type secretFlags struct {
	envName string
	file    string
}

func (s *secretFlags) register(fs *flag.FlagSet, several bool) {
	fs.StringVar(&s.envName, "secret-env", "WEBHOOK_SECRET", "the `name` of the environment variable holding the secret, not the secret itself")
	help := "a `file` holding the secret (instead of the environment variable)"
	if several {
		help = "a `file` holding the secrets, one a line: the old and the new one during a rotation (instead of the environment variable)"
	}
	fs.StringVar(&s.file, "secret-file", "", help)
}

// load returns the secrets: the lines of the file (blank lines and lines
// starting with # skipped), or the environment variable's value. Its errors
// name where it looked, never what it found. It notes them in e: fail never
// prints them.
func (s *secretFlags) load(e *env, several bool) ([]string, error) {
	secrets, err := s.read(e, several)
	if err == nil {
		e.loaded, e.loadedSecrets = secrets, redact.NewSecrets("", secrets, "")
	}
	return secrets, err
}

// pastedHint ends the error of a flag whose value may be the secret.
const pastedHint = "if it was the secret, it is in your shell's history now: rotate it"

// read is load, without noting the secrets.
func (s *secretFlags) read(e *env, several bool) ([]string, error) {
	if s.file != "" {
		file, hint := redact.Printable(s.file), ""
		if mayBeSecret(s.file) {
			file, hint = "(not shown: it reads as a secret, not a path)", "; "+pastedHint
		}
		data, err := os.ReadFile(s.file)
		if err != nil {
			// The error without its path, which may be the secret.
			reason := "cannot read it"
			if pe := (*os.PathError)(nil); errors.As(err, &pe) {
				reason += ": " + pe.Err.Error()
			}
			return nil, usagef("-secret-file %s: %s%s", file, reason, hint)
		}
		var secrets []string
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line != "" && !strings.HasPrefix(line, "#") {
				secrets = append(secrets, line)
			}
		}
		switch {
		case len(secrets) == 0:
			return nil, usagef("-secret-file %s holds no secret%s", file, hint)
		case len(secrets) > 1 && !several:
			return nil, usagef("-secret-file %s holds %d lines; this command signs with one secret%s", file, len(secrets), hint)
		}
		return secrets, nil
	}
	if !validEnvName(s.envName) {
		return nil, usagef("-secret-env wants the name of the environment variable holding the secret, such as WEBHOOK_SECRET: "+
			"letters, digits and _, not starting with a digit; the value given is not one (not shown: it may be the secret); %s", pastedHint)
	}
	secret := strings.TrimSpace(e.getenv(s.envName))
	switch {
	case secret == "" && mayBeSecret(s.envName):
		return nil, usagef("no secret: -secret-env wants the name of the environment variable holding the secret, such as WEBHOOK_SECRET; "+
			"the value given reads as a secret, not a name, and no variable of that name is set (not shown); %s", pastedHint)
	case secret == "":
		return nil, usagef("no secret: set the environment variable %s (\"Show Secret\" in the dashboard) or give -secret-file", s.envName)
	}
	return []string{secret}, nil
}

// validEnvName reports whether name is one a shell gives a variable:
// ASCII letters, digits and _, not starting with a digit.
func validEnvName(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return name != ""
}

// mayBeSecret reports whether s, the value of a flag naming a variable or a
// file, reads as a secret pasted in its place: it holds the service's prefix
// whsec_, in any case, or a run of 16 or more ASCII letters and digits in
// which digits come in two runs or more, as in a random key in hex, base32
// or base64 ("k7Qp2Zr9Xw4Lm8Nb", "JBSWY3DPEHPK3PXP"), and not in the names
// people write (STAGING_WEBHOOK_SECRET_2024, /run/secrets/webhook-v2,
// /tmp/TestName3340148021).
func mayBeSecret(s string) bool {
	if strings.Contains(strings.ToLower(s), webhook.SecretPrefix) || mayBeBase64URLKey(s) {
		return true
	}
	run, digitRuns := 0, 0
	for i := 0; i <= len(s); i++ {
		switch {
		case i < len(s) && '0' <= s[i] && s[i] <= '9':
			if i == 0 || s[i-1] < '0' || s[i-1] > '9' {
				digitRuns++
			}
			run++
		case i < len(s) && ('a' <= s[i] && s[i] <= 'z' || 'A' <= s[i] && s[i] <= 'Z'):
			run++
		default:
			if run >= 16 && digitRuns >= 2 {
				return true
			}
			run, digitRuns = 0, 0
		}
	}
	return false
}

// mayBeBase64URLKey reports whether s holds a run of 32 or more characters
// of URL-safe base64 (letters, digits, - and _) with letters of both cases
// and digits in three runs or more: the service's secret without its
// prefix (43 of them), whose - and _ may cut it into runs too short for
// mayBeSecret's other test. Names people write are of one case
// (STAGING_WEBHOOK_SECRET_2024_V2), a UUID's hex is lower case.
func mayBeBase64URLKey(s string) bool {
	run, digitRuns, lower, upper := 0, 0, false, false
	for i := 0; i <= len(s); i++ {
		c := byte(0)
		if i < len(s) {
			c = s[i]
		}
		switch {
		case '0' <= c && c <= '9':
			if i == 0 || s[i-1] < '0' || s[i-1] > '9' {
				digitRuns++
			}
		case 'a' <= c && c <= 'z':
			lower = true
		case 'A' <= c && c <= 'Z':
			upper = true
		case c == '-' || c == '_':
		default:
			if run >= 32 && digitRuns >= 3 && lower && upper {
				return true
			}
			run, digitRuns, lower, upper = 0, 0, false, false
			continue
		}
		run++
	}
	return false
}

// readInput reads name, or standard input for "-".
func (e *env) readInput(name string) ([]byte, error) {
	if name == "-" {
		data, err := io.ReadAll(e.stdin)
		if err != nil {
			return nil, fmt.Errorf("reading standard input: %w", err)
		}
		return data, nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return data, nil
}

// headerFlags collects repeated -H "Name: value" flags. One without a name
// and colon is counted, not refused: the flag package would quote it, and a
// header's value may be a credential (check refuses it).
type headerFlags struct {
	m         map[string]string
	malformed int
}

func (h *headerFlags) String() string { return "" }

func (h *headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if name = strings.TrimSpace(name); !ok || name == "" || strings.ContainsAny(name, " \t") {
		// No name and colon, or a name with spaces: "Authorization
		// Bearer tok:en" lacks the colon after its name.
		h.malformed++
		return nil
	}
	if h.m == nil {
		h.m = make(map[string]string)
	}
	h.m[name] = strings.TrimSpace(value)
	return nil
}

// check refuses the flags when one of them was malformed, without its text.
func (h *headerFlags) check() error {
	if h.malformed > 0 {
		return usagef(`-H wants "Name: value": %d of them has no name and colon (not shown: a header's value may be a credential)`, h.malformed)
	}
	return nil
}

// trustPool returns the system's certificate pool with the certificates
// of the PEM file added: -cacert, for a receiver with a certificate of its
// own.
func trustPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, usagef("%v", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(data) {
		return nil, usagef("%s holds no PEM certificate", redact.Printable(file))
	}
	return pool, nil
}
