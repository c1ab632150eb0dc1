module github.com/signedhook/webhook/internal/benchcmp

go 1.26.0

require (
	github.com/google/go-github/v75 v75.0.0
	github.com/signedhook/webhook v0.0.0-20261208005119-23c8ffd1587c
	github.com/standard-webhooks/standard-webhooks/libraries v0.0.1
	github.com/stripe/stripe-go/v85 v85.0.0
	github.com/svix/svix-webhooks v1.44.0
)

require (
	github.com/aclements/go-moremath v0.0.0-20210112150236-f10218a38794 // indirect
	github.com/google/go-querystring v1.1.0 // indirect
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/hashicorp/go-retryablehttp v0.7.8 // indirect
	golang.org/x/perf v0.0.0-20260908200009-22c9c6c9d4da // indirect
	gopkg.in/validator.v2 v2.0.1 // indirect
)

tool golang.org/x/perf/cmd/benchstat
