"""A run served over HTTP as the OpenAI API speaks it (``marin-pipelines serve``): one thread drives the
generation engine, the requests of every client share its decode batch."""
