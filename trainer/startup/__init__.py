"""A rank's start-up, before its first step: the warm launcher and its forked ranks, the progress it reports, where its seconds go, and the libraries and log lines kept out."""
