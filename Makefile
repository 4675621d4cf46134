# The two commands the README starts with.
.PHONY: serve test

serve:  ## set up, then run the main job with its embedded defaults
	./scripts/setup.sh && .venv/bin/agentconsole serve

test:   ## set up with the test tools, then run the whole test suite
	./scripts/setup.sh --test && ./scripts/test.sh
