package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestJSONPieces_JoinToTheBodyAndReadEachCharacter(t *testing.T) {
	for _, body := range []string{
		`{}`, `""`, `"a\"b\\"`, `{"k\u00e9y":["x\/y",1,true,null,"\ud83d\ude00"]}`,
		`{"lone":"\ud800 \udc00 \u00zz"}`, "{\"raw\":\"\xff\"}", `{"a" : "b" , "c":"d"}` + "\n",
	} {
		var b strings.Builder
		var chars []rune
		for _, p := range jsonPieces([]byte(body)) {
			b.WriteString(p.text)
			if p.char {
				chars = append(chars, p.r)
			}
		}
		assert.Equal(t, body, b.String())
		var s string
		if json.Unmarshal([]byte(body), &s) == nil && !strings.Contains(body, `\ud800`) {
			assert.Equal(t, s, string(chars), "the characters of %s", body)
		}
	}
}

func TestEscapeRewrites_SurrogatePairsAndCase(t *testing.T) {
	var bodies []string
	for _, r := range escapeRewrites([]byte(`{"smile":"\ud83d\ude00"}`)) {
		bodies = append(bodies, string(r.body))
	}
	assert.Contains(t, bodies, `{"smile":"😀"}`)
	assert.Contains(t, bodies, `{"smile":"\uD83D\uDE00"}`)
	for _, r := range escapeRewrites([]byte(`{"lone":"\ud800"}`)) {
		assert.Contains(t, string(r.body), `\ud800`, "a lone surrogate is kept as it is")
	}
}
