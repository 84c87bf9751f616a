"""The test suite (docs/testing.md): a package rooted at the repository, so tests and bench import its helpers as tests.helpers, tests.servers, tests.fast.fastkit."""
