package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A secret pasted where -secret-env wants a variable's name, or where
// -secret-file wants a file's path, is refused by every command that takes
// a secret, naming the flag, and is printed nowhere: not in the error, not
// in the usage hint.
func TestSecretFlags_ASecretPastedAsTheirValueIsNeverPrinted(t *testing.T) {
	pasted := []struct {
		name, value string
	}{
		// The service's secrets: whsec_ and 43 characters of URL-safe
		// base64, a valid variable name about half of the time.
		{"a secret that is a valid variable name", "whsec_3f9Ab0cD1eF2gH3iJ4kL5mN6oP7qR8sT9uV0wX1y"},
		{"a secret that is no variable name", "whsec_3f9A-b0cD1eF2gH3iJ4kL5mN6oP7qR8sT9uV0wX1y"},
		{"a secret without the prefix", "k7Qp2Zr9Xw4Lm8Nb3Vc6Ty1Hd5Gs0Jf"},
		{"a secret in other case", "WHSEC_Q2W3E4R5T6Y7U8I9O0P1A2S3D4F5G6"},
		{"a secret with its line break", "whsec_n0Rt4Hw3sT9sEcR3t7Y1u2I3o4P5a6\n"},
	}
	commands := [][]string{
		{"sign"},
		{"verify", "-request", "-"},
		{"listen", "-addr", "127.0.0.1:0"},
		{"trigger", "-allow-private", "https://127.0.0.1:1/webhooks"},
	}
	for _, p := range pasted {
		// What of it must not show: the whole, and any long part of it.
		shown := strings.TrimSpace(p.value)
		parts := []string{shown, shown[6:18], shown[len(shown)-12:]}
		for _, flagName := range []string{"-secret-env", "-secret-file"} {
			for _, cmd := range commands {
				t.Run(p.name+"/"+flagName+"/"+cmd[0], func(t *testing.T) {
					args := append(append([]string{}, cmd...), flagName, p.value)
					res := runCmd(t, "", args...)
					assert.Equal(t, exitUsage, res.code, res.stderr)
					assert.Empty(t, res.stdout)
					assert.Contains(t, res.stderr, flagName, "the error names the flag")
					for _, part := range parts {
						assert.NotContains(t, strings.ToLower(res.stderr), strings.ToLower(part), "the value is not printed, in any case")
					}
				})
			}
		}
	}
}

// A value that reads as a name or a path is still named in the error: it
// is what the user needs to see to correct it.
func TestSecretFlags_ANameOrPathIsStillNamed(t *testing.T) {
	res := runCmd(t, "", "sign", "-secret-env", "STAGING_WEBHOOK_SECRET")
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, "STAGING_WEBHOOK_SECRET")

	missing := filepath.Join(t.TempDir(), "secrets", "prod.txt")
	res = runCmd(t, "", "listen", "-secret-file", missing)
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, missing)
	assert.Contains(t, res.stderr, "-secret-file")

	empty := writeFile(t, "empty-secret", []byte("# none yet\n"))
	res = runCmd(t, "", "verify", "-secret-file", empty)
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, empty)
	assert.Contains(t, res.stderr, "holds no secret")
}

// mayBeSecret tells the random keys people paste from the names and paths
// they write.
func TestMayBeSecret(t *testing.T) {
	for s, want := range map[string]bool{
		"WEBHOOK_SECRET":                            false,
		"STAGING_WEBHOOK_SECRET_2024_V2":            false,
		"/run/secrets/webhook-v2/2024-05-01.txt":    false,
		"/tmp/TestSecretFlags3340148021/001/secret": false,
		"3f2a9b1c-4d5e-6f70-8a9b-0c1d2e3f4a5b.txt":  false, // a UUID's parts are short
		"whsec_short":                                 true,
		"secrets/WhSeC_anything":                      true,
		"JBSWY3DPEHPK3PXP":                            true, // base32
		"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b":    true, // hex
		"k7Qp2Zr9Xw4Lm8Nb3Vc6Ty1Hd5Gs0Jf":             true, // base64
		"Xf9Ab0cD_1eF2gH3iJ4k-L5mN6oP7qR8_sT9uV0wX1y": true, // base64url, cut by - and _
		"my-service_WEBHOOK_SECRET_2024_V2_prod":      false,
	} {
		assert.Equal(t, want, mayBeSecret(s), s)
	}
}

// The service's secret without its prefix is 43 characters of URL-safe
// base64, whose - and _ cut it into runs shorter than 16 one time in
// several: such a secret, pasted, is not printed back either, as a file's
// path or as a variable's name.
func TestSecretFlags_AnUnprefixedSecretCutByDashesIsNotPrinted(t *testing.T) {
	for _, c := range []struct{ flag, value string }{
		{"-secret-file", "Xf9Ab0cD_1eF2gH3iJ4k-L5mN6oP7qR8_sT9uV0wX1y"},
		{"-secret-env", "Xf9Ab0cD_1eF2gH3iJ4k_L5mN6oP7qR8_sT9uV0wX1y"}, // a valid variable name
	} {
		res := runCmd(t, "", "sign", c.flag, c.value)
		assert.Equal(t, exitUsage, res.code, res.stderr)
		assert.Contains(t, res.stderr, c.flag)
		for _, part := range []string{"Xf9Ab0cD", "1eF2gH3iJ4k", "L5mN6oP7qR8", "sT9uV0wX1y"} {
			assert.NotContains(t, res.stderr, part, "%s: the pasted secret is printed", c.flag)
		}
	}
}
