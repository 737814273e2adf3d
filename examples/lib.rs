//! Examples for erdma live as `[[example]]` targets beside this file.
