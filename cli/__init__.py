"""Start-up: the `tunedeck` command and the services it runs. A top-level package above the
core, the web and the worker: the only code outside app/ and worker/ that may import them;
nothing of the product (tunedeck/, app/, worker/, trainer/, migrations/) imports this."""